"""What jobs do across nodes: replication, requeue coordination, ACK GC, federation."""
