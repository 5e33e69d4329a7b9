#!/usr/bin/env bash
# Start a one-node SLURM cluster on this machine (as root), for profiles/slurm and
# tests/test_slurm_cluster.py.  Idempotent: a second run changes nothing that is
# already up.  What it does:
#   1. installs Debian's slurm-wlm and munge with apt when slurmctld is missing;
#   2. creates a munge key if there is none and starts munged;
#   3. writes /etc/slurm/slurm.conf and gres.conf: this node with its cores and
#      memory, partitions `compute` (default) and `gpu`, the node's GPUs as a GRES
#      (its /dev/nvidia* devices, or, on a machine without any, DISTLAB_SLURM_GPUS
#      (default 8) GPUs without devices, so GPU requests can be submitted and queued),
#      MinJobAge 600 s (squeue keeps finished jobs that long: the status command of
#      profiles/slurm), and no accounting database by default;
#   4. starts slurmctld and slurmd, or reconfigures them when the config changed;
#   5. waits until the node is idle.
# Environment: DISTLAB_SLURM_GPUS (GPUs declared without devices; default 8),
#              DISTLAB_SLURM_ACCOUNTING=slurmdbd: with an accounting database (MariaDB
#              and slurmdbd on this host, installed with apt if missing; default: none).
set -euo pipefail

log() { echo "slurm_up: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "must run as root (it installs packages and starts daemons)"; exit 2
fi

# ---------------------------------------------------------------- 1. packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    log "installing slurm-wlm and munge with apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# ---------------------------------------------------------------- 2. munge
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key --force
    else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null

# ---------------------------------------------------------------- 3. configuration
HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.95)}' /proc/meminfo)
shopt -s nullglob
DEVICES=(/dev/nvidia[0-9]*)
shopt -u nullglob
if [ "${#DEVICES[@]}" -gt 0 ]; then
    GPUS=${#DEVICES[@]}
    GRES_LINE="NodeName=$HOST Name=gpu File=/dev/nvidia[0-$((GPUS - 1))]"
else
    # No devices: the GPUs are only counted.  slurm 22.05's gres/gpu reports 0 GPUs for a
    # gres.conf line without File= (the node goes INVAL), so each GPU gets an empty
    # placeholder file; nothing is behind it (a job sees CUDA_VISIBLE_DEVICES, no GPU).
    GPUS=${DISTLAB_SLURM_GPUS:-8}
    install -d -m 0755 /var/lib/distlab-slurm
    for i in $(seq 0 $((GPUS - 1))); do : >>"/var/lib/distlab-slurm/gpu$i"; done
    GRES_LINE="NodeName=$HOST Name=gpu File=/var/lib/distlab-slurm/gpu[0-$((GPUS - 1))]"
fi
if [ "${DISTLAB_SLURM_ACCOUNTING:-none}" = slurmdbd ]; then
    # an accounting database on this host: MariaDB, a slurm_acct_db for root, slurmdbd
    if ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; then
        log "installing slurmdbd and mariadb-server with apt"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends slurmdbd mariadb-server >/dev/null
    fi
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    if ! mysqladmin ping >/dev/null 2>&1; then
        log "starting mariadb"
        (mysqld_safe >/dev/null 2>&1 &)
        for _ in $(seq 100); do mysqladmin ping >/dev/null 2>&1 && break; sleep 0.2; done
    fi
    mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
              CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'distlab';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
    install -d -m 0755 /etc/slurm /run/slurm /var/log/slurm
    DBD=$(mktemp)
    printf '%s\n' "# written by distlab scripts/slurm_up.sh" "AuthType=auth/munge" "DbdHost=$HOST" \
        "SlurmUser=root" "PidFile=/run/slurm/slurmdbd.pid" "LogFile=/var/log/slurm/slurmdbd.log" \
        "StorageType=accounting_storage/mysql" "StorageHost=localhost" "StorageUser=slurm" \
        "StoragePass=distlab" "StorageLoc=slurm_acct_db" >"$DBD"
    cmp -s "$DBD" /etc/slurm/slurmdbd.conf || install -m 0600 "$DBD" /etc/slurm/slurmdbd.conf
    rm -f "$DBD"
    if ! { [ -s /run/slurm/slurmdbd.pid ] && [ "$(cat "/proc/$(cat /run/slurm/slurmdbd.pid)/comm" 2>/dev/null)" = slurmdbd ]; }; then
        log "starting slurmdbd"; /usr/sbin/slurmdbd
    fi
    ACCOUNTING="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$HOST
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux"
else
    ACCOUNTING="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi

install -d -m 0755 /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm
NEW=$(mktemp)
cat >"$NEW" <<EOF
# written by distlab scripts/slurm_up.sh: a one-node cluster
ClusterName=distlab
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# the node as configured here (GPUs without devices are not detected)
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=30
GresTypes=gpu
$ACCOUNTING
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:$GPUS State=UNKNOWN
PartitionName=compute Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$HOST MaxTime=INFINITE State=UP
EOF
NEW_GRES=$(mktemp)
printf 'AutoDetect=off\n%s\n' "$GRES_LINE" >"$NEW_GRES"
changed=0
if ! cmp -s "$NEW" /etc/slurm/slurm.conf; then install -m 0644 "$NEW" /etc/slurm/slurm.conf; changed=1; fi
if ! cmp -s "$NEW_GRES" /etc/slurm/gres.conf; then install -m 0644 "$NEW_GRES" /etc/slurm/gres.conf; changed=1; fi
rm -f "$NEW" "$NEW_GRES"

# ---------------------------------------------------------------- 4. daemons
running() {  # the daemon whose pid file names a live process of that name
    local pidfile=$1 name=$2 pid
    [ -s "$pidfile" ] || return 1
    pid=$(cat "$pidfile")
    [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$name" ]
}
if [ "${DISTLAB_SLURM_ACCOUNTING:-none}" = slurmdbd ]; then  # the cluster, known to the database
    for _ in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
    sacctmgr -n list cluster format=cluster | grep -qw distlab || sacctmgr -i add cluster distlab >/dev/null
fi
STAMP=/run/slurm/distlab-config.sha256   # the configuration the running daemons read
WANT=$(cat /etc/slurm/slurm.conf /etc/slurm/gres.conf | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then changed=1; fi
if [ "$changed" = 1 ] && { running /run/slurm/slurmctld.pid slurmctld || running /run/slurm/slurmd.pid slurmd; }; then
    # node and GRES definitions take a restart (reconfigure keeps a node INVAL)
    log "configuration changed: restarting slurmctld and slurmd"
    scontrol shutdown || true
    for _ in $(seq 100); do
        running /run/slurm/slurmctld.pid slurmctld || running /run/slurm/slurmd.pid slurmd || break
        sleep 0.2
    done
fi
started=0
if ! running /run/slurm/slurmctld.pid slurmctld; then
    log "starting slurmctld"; /usr/sbin/slurmctld; started=1
fi
if ! running /run/slurm/slurmd.pid slurmd; then
    log "starting slurmd"; /usr/sbin/slurmd; started=1
fi
echo "$WANT" >"$STAMP"
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q "UP" && break; sleep 0.2; done
scontrol ping | grep -q UP || { log "slurmctld does not answer (see /var/log/slurm/slurmctld.log)"; exit 1; }

# ---------------------------------------------------------------- 5. the node
for _ in $(seq 150); do
    state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null | head -1)
    case "$state" in
        idle|mixed|allocated|completing) break ;;
        down*|drain*|drained*|inval*) scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.2
done
state=$(sinfo -h -n "$HOST" -o %T | head -1)
case "$state" in
    idle|mixed|allocated|completing) ;;
    *) log "node $HOST is $state (see /var/log/slurm/slurmd.log)"; exit 1 ;;
esac
log "up: node $HOST ($CPUS CPUs, $MEM_MB MB, gpu:$GPUS), partitions compute (default) and gpu"
sinfo
