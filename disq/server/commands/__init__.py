"""One module per command family; each handler registers itself in `..table`.

- jobs.py: ADDJOB GETJOB ACKJOB FASTACK NACK ENQUEUE DEQUEUE DELJOB WORKING SHOW LOADJOB
- queues.py: QLEN QPEEK QSTAT QSCAN JSCAN PAUSE
- cluster.py: CLUSTER HELLO
- admin.py: PING AUTH INFO CONFIG DEBUG TIME COMMAND CLIENT SHUTDOWN SLOWLOG LATENCY
  BGREWRITEAOF MONITOR (QUIT is handled by the connection itself)
"""
