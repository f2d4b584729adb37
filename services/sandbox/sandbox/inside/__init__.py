"""Code that runs inside the sandbox under the system ``/usr/bin/python3 -I``: stdlib only.

The service binds this folder read-only at ``/sandbox`` and starts ``zygote.py`` there; the
zygote imports ``harness`` by file path. Nothing here may import the service's packages.
"""
