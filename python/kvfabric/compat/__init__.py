"""Compatibility facades for engines written against other KV stores."""
