"""Prints a Slurm job id whose MASTER_PORT (15000 + its last four digits) is free on 127.0.0.1 now (exit 1: none)."""
import random
import socket
import sys

for _ in range(200):
    job = random.randrange(10000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 15000 + job))
        print(1230000 + job)
        sys.exit(0)
    except OSError:
        pass
    finally:
        s.close()
sys.exit(1)
