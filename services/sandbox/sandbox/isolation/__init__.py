"""The isolation layers: bubblewrap command, seccomp filter, rlimits, pids cgroup, identity,
and the start-up plan that decides which of them this host gives."""
