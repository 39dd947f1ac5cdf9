"""The RESP front end: connections, the command table and one module per command family."""
