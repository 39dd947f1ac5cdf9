"""Membership, gossip, failure detection and the node-to-node bus."""
