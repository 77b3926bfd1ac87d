"""The server: one queue directory served on a Unix socket (`walqueue-serve`, `python -m walqueue.serve`).

Its modules, outside in: `cli` (the command line; it wires the dashboard's
``--http`` only when asked), `server` (starting and stopping in a safe
order), `eventloop` (the one thread that owns the queue and the sockets),
`conversation` (one connection's buffers, no I/O), `listener` (the socket
file) and `parentpipe` (stopping with the process that started it). What a
request means and what its answer says is `walqueue.protocol`'s.
"""
