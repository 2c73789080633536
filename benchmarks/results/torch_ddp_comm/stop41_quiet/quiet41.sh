#!/bin/bash
# Stop 41's quiet window: the helpers' final speed commands, one after another on the idle machine.
# "before" = 50b3b217 (stop 40's last commit), "after" = main. Run from /work/main.
cd /work/main
P=.venv/bin/python
export RISKOPT_DATA=/work/shared/data
L=/tmp/q41log; mkdir -p $L
rm -rf /tmp/q41 /tmp/q41_base && mkdir -p /tmp/q41_base /tmp/q41 && git archive 50b3b217 src | tar -x -C /tmp/q41_base
echo "start $(date -u +%T) $(uptime)" > $L/times.txt
# 28: torch losses at b = 8192 (one thread)
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q41_nc2 $P benchmarks/torch_losses_speed.py --src /tmp/q41_base/src --sizes 8192 --only "shift_cost=1))" "kl))" --label "quiet before (50b3b217)" --out /tmp/q41/tls > $L/tls.txt 2>&1
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q41_nc2 $P benchmarks/torch_losses_speed.py --glue --sizes 8192 --only "shift_cost=1))" "kl))" --label "quiet after (main)" --out /tmp/q41/tls >> $L/tls.txt 2>&1
echo "28 $(date -u +%T) $(uptime)" >> $L/times.txt
# 27: DDP step ratios, both widths
for t in before after; do s=src; [ $t = before ] && s=/tmp/q41_base/src; PYTHONPATH=$s OMP_NUM_THREADS=1 $P benchmarks/torch_ddp_comm.py --hidden 256 1024 --repeats 8 --out /tmp/q41/ddp/$t > $L/ddp_$t.txt 2>&1; done
echo "27 $(date -u +%T) $(uptime)" >> $L/times.txt
# 31: batch oracle against np.sort
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q41_nc3 $P benchmarks/oracle_speed.py --n 8192 --repeats 301 --base-src /tmp/q41_base/src --out /tmp/q41/os8192 > $L/os8192.txt 2>&1
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q41_nc3 $P benchmarks/oracle_speed.py --base-src /tmp/q41_base/src --out /tmp/q41/os1e6 > $L/os1e6.txt 2>&1
echo "31os $(date -u +%T) $(uptime)" >> $L/times.txt
# 33: time ratios of the goal rows (one split per case, riskopt's default and fairlearn's form side by side)
PYTHONPATH=src OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $P benchmarks/fairness_vs_fairlearn.py --cases adult:sex,adult:race,compas:race,compas:race:min=100 --repeats 3 --boot 50 --variants default,to_overall --out /tmp/q41/fvf > $L/fvf.txt 2>&1
echo "33 $(date -u +%T) $(uptime)" >> $L/times.txt
