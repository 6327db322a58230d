#!/usr/bin/env bash
# The day -> night switch as an admin would script it by hand, one node at a time: the
# baseline gpupool's transition benchmark compares against ('make bench-transition').
#
#   hack/sequential-switch.sh "DAY_VM..." "NIGHT_VM..."
#
# Needs KUBECONFIG and the GOVC_* variables (the local environment's env.sh), and
# kubectl and govc on PATH. Node names are the VM names.
set -euo pipefail
day=($1)
night=($2)
for vm in "${day[@]}"; do
  kubectl drain "$vm" --ignore-daemonsets --delete-emptydir-data --timeout=10m >/dev/null
  govc vm.power -suspend "$vm" >/dev/null
done
for vm in "${night[@]}"; do
  govc vm.power -on "$vm" >/dev/null
  kubectl wait --for=condition=Ready "node/$vm" --timeout=10m >/dev/null
  kubectl label --overwrite node "$vm" lab.example/workload=training >/dev/null
  kubectl uncordon "$vm" >/dev/null
done
