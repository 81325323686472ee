#!/usr/bin/env bash
# A real single-node Slurm on this machine: what dybw's `cluster` tests run against, and a laptop cluster
# for trying a sweep's Slurm settings before a real cluster (docs/cluster.md).
#
#   tests/cluster/slurm.sh up       install what is missing, write the configs, start the daemons, wait
#                                   until the node is idle and accounting answers
#   tests/cluster/slurm.sh down     stop the daemons this script started (by PID)
#   tests/cluster/slurm.sh status   what runs, and the node's state
#
# Needs root and a Debian-like system (apt): slurmctld, slurmd, slurm-client and munge, with slurmdbd on
# a local MariaDB for accounting (`sacct`, which submitit reads a job's end from). No systemd is needed:
# every daemon runs in the foreground (-D) under nohup, its PID kept in $RUN_DIR.
# The configs go where Slurm's commands look for them (/etc/slurm); a slurm.conf that this script did not
# write is never replaced.  Every failure says what failed and where its log is, and exits non-zero.
set -euo pipefail

CLUSTER=dybw
RUN_DIR=/run/dybw-slurm            # PIDs of the daemons started here
STATE_DIR=/var/lib/dybw-slurm      # slurmctld's and slurmd's state
LOG_DIR=/var/log/dybw-slurm        # every daemon's log
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
MARK="# written by dybw's tests/cluster/slurm.sh"
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)   # started in this order, stopped in the reverse
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)

die() { echo "slurm.sh: $*" >&2; exit 1; }
log() { echo "slurm.sh: $*"; }

wait_for() {  # wait_for <seconds> <what> <command...>: until the command succeeds, else die naming <what>
    local seconds=$1 what=$2; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$what did not happen within ${seconds} s (logs: $LOG_DIR)"
        sleep 0.5
    done
}

running() { [[ -f $RUN_DIR/$1.pid ]] && kill -0 "$(cat "$RUN_DIR/$1.pid")" 2>/dev/null; }

start() {  # start <name> <command...>: in the foreground of a session of its own, PID kept
    local name=$1; shift
    if running "$name"; then log "$name already runs (pid $(cat "$RUN_DIR/$name.pid"))"; return; fi
    nohup setsid "$@" >"$LOG_DIR/$name.out" 2>&1 </dev/null &
    echo $! >"$RUN_DIR/$name.pid"
    sleep 0.3
    running "$name" || die "$name exited at once: $(tail -n 5 "$LOG_DIR/$name.out" | tr '\n' ' ')"
}

install_packages() {
    local missing=()
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    ((${#missing[@]} == 0)) && return
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    log "installing ${missing[*]} (Debian packages)"
    # policy-rc.d stops the packages from starting their own daemons: this script starts them.
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get update -qq >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >"$LOG_DIR/apt.log" 2>&1 \
        || die "apt-get install ${missing[*]} failed (log: $LOG_DIR/apt.log)"
}

write_configs() {
    local host cpus memory
    host=$(hostname -s)
    cpus=$(nproc)
    # What slurmd itself detects, less 1 GiB for the daemons and the database.
    memory=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
    memory=$((memory - 1024))
    if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script: this machine has a Slurm of its own"
    fi
    mkdir -p /etc/slurm
    cat >"$CONF" <<EOF
$MARK: a single-node cluster named $CLUSTER
ClusterName=$CLUSTER
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job waits cred_expire seconds before it may start again (120 by default): shorter here, so
# that the requeue tests do not wait two minutes per requeue.
AuthInfo=cred_expire=20
StateSaveLocation=$STATE_DIR/ctld
SlurmdSpoolDir=$STATE_DIR/d
SlurmctldPidFile=$RUN_DIR/slurmctld.own.pid
SlurmdPidFile=$RUN_DIR/slurmd.own.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
# No systemd or cgroups needed: processes tracked by their parents, tasks not bound to cores.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# srun starts an MPI world that the MPICH wheel of pip (mpi4py's) joins.
MpiDefault=pmi2
SchedulerType=sched/backfill
# Pending jobs are looked at every 5 s (60 by default), so a requeued job starts soon after it may.
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
# A node that comes back after a failure serves jobs again.
ReturnToService=2
# Accounting, so that sacct reports each job's end (submitit reads it).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
JobCompType=jobcomp/none
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$DBD_CONF" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$RUN_DIR/slurmdbd.own.pid
LogFile=$LOG_DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=root
EOF
    chmod 600 "$DBD_CONF"
}

up() {
    [[ $(id -u) == 0 ]] || die "needs root (it installs packages and starts system daemons)"
    mkdir -p "$RUN_DIR" "$STATE_DIR/ctld" "$STATE_DIR/d" "$LOG_DIR"
    install_packages
    write_configs

    mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
    [[ -s /etc/munge/munge.key ]] || runuser -u munge -- mungekey --create
    start munged runuser -u munge -- munged --foreground
    wait_for 20 "munge answering" sh -c 'munge -n | unmunge'

    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    start mariadbd mariadbd --user=mysql
    wait_for 60 "MariaDB answering" mariadb-admin ping
    # root connects through the socket (unix_socket authentication): no password is stored anywhere.
    mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db"

    start slurmdbd slurmdbd -D
    wait_for 60 "slurmdbd answering" sacctmgr -n list cluster
    sacctmgr -n list cluster format=cluster | grep -qw "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null

    start slurmctld slurmctld -D
    wait_for 60 "slurmctld answering" scontrol ping
    start slurmd slurmd -D
    local host
    host=$(hostname -s)
    # A node left down or drained by an earlier run (a test that failed it) serves again.
    wait_for 60 "node $host registered" sh -c "sinfo -h -n $host -o %T | grep -q ."
    if sinfo -h -n "$host" -o %T | grep -Eq 'down|drain'; then
        scontrol update nodename="$host" state=resume
    fi
    wait_for 60 "node $host idle" sh -c "sinfo -h -n $host -o %T | grep -Eq '^(idle|mixed|allocated)'"
    wait_for 30 "accounting answering" sacct -n -X -S now
    log "up: cluster $CLUSTER, node $host ($(nproc) CPUs), partition debug; logs in $LOG_DIR"
}

down() {
    local index name pid
    for ((index = ${#DAEMONS[@]} - 1; index >= 0; index--)); do
        name=${DAEMONS[index]}
        [[ -f $RUN_DIR/$name.pid ]] || continue
        pid=$(cat "$RUN_DIR/$name.pid")
        if kill -0 "$pid" 2>/dev/null; then
            # setsid made the daemon a session leader: signal its whole group (runuser and munged alike).
            kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            kill -KILL -- "-$pid" 2>/dev/null || true
        fi
        rm -f "$RUN_DIR/$name.pid"
        log "stopped $name"
    done
}

status() {
    local name
    for name in "${DAEMONS[@]}"; do
        if running "$name"; then echo "$name: running (pid $(cat "$RUN_DIR/$name.pid"))"; else echo "$name: stopped"; fi
    done
    if running slurmctld; then sinfo; fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
