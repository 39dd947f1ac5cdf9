"""The node's HTTP front end (`http-port`): the API, its docs, the dashboard."""
