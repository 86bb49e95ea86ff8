#!/usr/bin/env bash
# Two hosts on one machine: enhanced-train as 2 MPI ranks in two network namespaces joined by a
# veth pair, over TCP only (mpirun's launcher enters the namespace named by the host), must end
# with the bits of the same 2-rank run over shared memory. Exit 77 (CTest: skipped) with the
# reason when this machine cannot: not root, no `ip`, no namespaces. The addresses 10.213.0.1/2
# exist only inside the two namespaces this script makes, and it always removes them.
#   tests/two_hosts.sh APP_DIR MPIEXEC WORK_DIR
set -euo pipefail
app_dir=$1 mpiexec=$2 work=$3
[[ $(id -u) == 0 ]] || { echo "SKIPPED: needs root (ip netns add)"; exit 77; }
command -v ip >/dev/null || { echo "SKIPPED: no ip command (iproute2)"; exit 77; }
ns1=enh1-$$ ns2=enh2-$$
# Deleting a namespace deletes the veth end inside it, and with it the pair.
cleanup() {
  ip link del "v1-$$" 2>/dev/null || true
  ip netns del "$ns1" 2>/dev/null || true
  ip netns del "$ns2" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns1" && ip netns add "$ns2" || { echo "SKIPPED: cannot create network namespaces here"; exit 77; }
ip link add "v1-$$" type veth peer name "v2-$$" || { echo "SKIPPED: cannot create a veth pair here"; exit 77; }
ip link set "v1-$$" netns "$ns1"
ip link set "v2-$$" netns "$ns2"
ip -n "$ns1" addr add 10.213.0.1/24 dev "v1-$$"
ip -n "$ns2" addr add 10.213.0.2/24 dev "v2-$$"
for ns in "$ns1" "$ns2"; do ip -n "$ns" link set lo up; done
ip -n "$ns1" link set "v1-$$" up
ip -n "$ns2" link set "v2-$$" up

rm -rf "$work" && mkdir -p "$work"
cat > "$work/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in 10.213.0.1) ns=$ns1;; 10.213.0.2) ns=$ns2;; *) echo "agent: unknown host \$host" >&2; exit 1;; esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$work/agent.sh"
printf "10.213.0.1 slots=1\n10.213.0.2 slots=1\n" > "$work/hosts"
"$app_dir/enhanced-data" demo "$work/data" --train 80 --valid 24 --test 24 --vocab 128 --dim 8 >/dev/null
flags="--data $work/data/train.ebin --valid $work/data/valid.ebin --pretrained $work/data/emb.bin --embedding-dim 8
       --hidden 6 --batch-size 11 --threads 1 --quiet --seed 5 --steps 20 --valid-every 10 --optimizer adam --lr 0.01"
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$app_dir/enhanced-train" $flags --out "$work/local"
ip netns exec "$ns1" "$mpiexec" --allow-run-as-root -np 2 --hostfile "$work/hosts" --mca plm_rsh_agent "$work/agent.sh" \
  --mca btl tcp,self --mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 \
  "$app_dir/enhanced-train" $flags --out "$work/two-hosts"
cmp "$work/local/last.safetensors" "$work/two-hosts/last.safetensors"
cmp "$work/local/optimizer.safetensors" "$work/two-hosts/optimizer.safetensors"
echo "two hosts over TCP: the bits of the shared-memory run"
