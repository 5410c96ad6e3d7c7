"""What every engine behind an OpenAI-compatible server shares, and the two generic kinds.

    client.py     the OpenAI-compatible HTTP client (evaluation, streamed timed requests)
    running.py    the running engine a served variant is evaluated and measured through
    process.py    one server process: started from a command, waited for, stopped with its group
    servers.py    a variant's servers started together on free loopback ports
    metrics.py    a server's Prometheus /metrics: queue/compute histograms (vLLM, TGI), counters
    footprint.py  a server's memory, read off its own processes, and what of it the variant needs
    command.py    engine=command: any server started per variant from a command template
    attached.py   engine=openai: a server that is already running, attached by URL
"""
