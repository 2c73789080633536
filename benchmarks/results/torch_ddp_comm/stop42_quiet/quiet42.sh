#!/bin/bash
# Stop 42's quiet window: the helpers' final speed commands, one after another on the idle machine.
# "before" = 1177b104 (stop 41's last commit), "after" = main. Run from /work/main.
cd /work/main
P=.venv/bin/python
export RISKOPT_DATA=/work/shared/data
L=/tmp/q42log; mkdir -p $L
Q=/tmp/q42; B=/tmp/q42_base/src
rm -rf $Q /tmp/q42_base && mkdir -p /tmp/q42_base $Q && git archive 1177b104 src | tar -x -C /tmp/q42_base
echo "start $(date -u +%T) $(uptime)" > $L/times.txt
# 28: torch losses at b = 8192 (one thread), several processes
for i in 1 2; do PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q42_nc2 $P benchmarks/torch_losses_speed.py --src $B --processes 5 --reps 21 --block-ms 10 --sizes 8192 --only "shift_cost=1))" "kl))" --label "quiet before $i" --out $Q/tls >> $L/tls.txt 2>&1; PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q42_nc2 $P benchmarks/torch_losses_speed.py --processes 5 --ab-host --reps 21 --block-ms 10 --sizes 8192 --only "shift_cost=1))" "kl))" --label "quiet after $i" --out $Q/tls >> $L/tls.txt 2>&1; done
# 28: every host-path loss at every size (the whole must-show table), after, 3 processes
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q42_nc2 $P benchmarks/torch_losses_speed.py --processes 3 --only "CVaR(0.1))" "shift_cost=1))" "kl))" "KLDROLoss(shift_cost=1)" "radius=0.5)" "GroupDROLoss" --label "quiet after, every host loss" --out $Q/tls_all > $L/tls_all.txt 2>&1
echo "28 $(date -u +%T) $(uptime)" >> $L/times.txt
# 27: DDP step ratios, both widths, every row; after twice (the noise of one tree)
for t in before after after2; do s=src; [ $t = before ] && s=$B; PYTHONPATH=$s OMP_NUM_THREADS=1 $P benchmarks/torch_ddp_comm.py --hidden 256 1024 --repeats 8 --out $Q/ddp/$t > $L/ddp_$t.txt 2>&1; done
echo "27ddp $(date -u +%T) $(uptime)" >> $L/times.txt
# 27: one process, both trees side by side in one process
for h in 256 1024; do PYTHONPATH=src OMP_NUM_THREADS=1 $P benchmarks/torch_optim_before_after.py --before 1177b104 --hidden $h --blocks 9 --out $Q/oba > $L/oba_$h.txt 2>&1; done
echo "27oba $(date -u +%T) $(uptime)" >> $L/times.txt
# 31: batch oracle against np.sort (i28's kernel changes must not regress it)
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q42_nc3 $P benchmarks/oracle_speed.py --n 8192 --repeats 301 --base-src $B --out $Q/os8192 > $L/os8192.txt 2>&1
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q42_nc3 $P benchmarks/oracle_speed.py --base-src $B --out $Q/os1e6 > $L/os1e6.txt 2>&1
echo "31os $(date -u +%T) $(uptime)" >> $L/times.txt
# 31: Prospect's step replay at 2e4 (i31)
PYTHONPATH=$PWD/src NUMBA_CACHE_DIR=/tmp/q42i31 $P benchmarks/prospect_oracle_steps.py --sizes 20000 --chunks 32 --cases esrm:chi2 --base-src $B --out $Q/pos > $L/pos.txt 2>&1
echo "31pos $(date -u +%T) $(uptime)" >> $L/times.txt
