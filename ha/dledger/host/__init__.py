"""The IO around the node: the host loop, the peer transport, the wire format and handshake."""
