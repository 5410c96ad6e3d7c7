from selector.cli import command

command()
