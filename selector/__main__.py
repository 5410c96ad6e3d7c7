from selector.cli import main

main()
