"""The cluster of a run (I/O): what each node is and how it is configured (node definitions,
``server.properties``), and the services that format, start, stop and watch its containers."""
