"""The request/answer core both sides import, with no I/O of its own (the h11 way).

`calltable` declares every public call once (its arguments, their kinds
from `callkinds`, its answer, and whether it writes, retries, parks or is
served by the server itself); `requests` is what a request line means and
what its answer says (the consumer and the server); `lines` splits a byte
stream into bounded lines; `shaping` turns a client's call into a request
and its answer back into a value; `exchange` is the clients' in-flight
bookkeeping and reconnect rule; `source` declares the calls every source
of tasks has (`QueueSource`: `Queue`, `Client`; `AsyncQueueSource`:
`AsyncClient`), for the dashboard and the worker to take. The engine knows
nothing of them.
"""
