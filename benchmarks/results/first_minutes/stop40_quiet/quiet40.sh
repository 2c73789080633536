#!/bin/bash
cd /work/main
P=.venv/bin/python
export RISKOPT_DATA=/work/shared/data
mkdir -p /tmp/q40log
rm -rf /tmp/q40 /tmp/q40_nc /tmp/q40_base && mkdir -p /tmp/q40_base && git archive 3f64a81b src | tar -x -C /tmp/q40_base
echo "start $(date -u +%T) $(uptime)" > /tmp/q40log/times.txt
# 29 warm
NUMBA_CACHE_DIR=/tmp/q40_nc $P benchmarks/first_minutes.py --repeats 9 --starts 1 --out /tmp/q40/fm > /tmp/q40log/fm.txt 2>&1
NUMBA_CACHE_DIR=/tmp/q40_nc $P benchmarks/warm_fits_ab.py --before /tmp/q40_base/src --rounds 10 --out /tmp/q40/ab > /tmp/q40log/ab.txt 2>&1
echo "29warm $(date -u +%T) $(uptime)" >> /tmp/q40log/times.txt
# 29 cold
OPENBLAS_NUM_THREADS=1 PYTHONPATH=src $P benchmarks/cold_fit_ab.py --before /tmp/q40_base/src --before-label 3f64a81b --rounds 7 --out /tmp/q40c > /tmp/q40log/cold.txt 2>&1
echo "29cold $(date -u +%T) $(uptime)" >> /tmp/q40log/times.txt
# 28 torch losses 8192
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q40_nc2 $P benchmarks/torch_losses_speed.py --src /tmp/q40_base/src --sizes 8192 --only "shift_cost=1))" "kl))" --label "quiet before (3f64a81b)" --out /tmp/tls40 > /tmp/q40log/tls.txt 2>&1
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q40_nc2 $P benchmarks/torch_losses_speed.py --glue --sizes 8192 --only "shift_cost=1))" "kl))" --label "quiet after (main)" --out /tmp/tls40 >> /tmp/q40log/tls.txt 2>&1
echo "28 $(date -u +%T) $(uptime)" >> /tmp/q40log/times.txt
# 27 DDP
for t in before after; do s=src; [ $t = before ] && s=/tmp/q40_base/src; PYTHONPATH=$s OMP_NUM_THREADS=1 $P benchmarks/torch_ddp_comm.py --hidden 256 1024 --repeats 8 --out /tmp/q40ddp/$t > /tmp/q40log/ddp_$t.txt 2>&1; done
echo "27 $(date -u +%T) $(uptime)" >> /tmp/q40log/times.txt
# 31 oracle speed
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q40_nc3 $P benchmarks/oracle_speed.py --n 8192 --repeats 301 --base-src /tmp/q40_base/src --out /tmp/os8192 > /tmp/q40log/os8192.txt 2>&1
PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/q40_nc3 $P benchmarks/oracle_speed.py --base-src /tmp/q40_base/src --out /tmp/os1e6 > /tmp/q40log/os1e6.txt 2>&1
echo "31os $(date -u +%T) $(uptime)" >> /tmp/q40log/times.txt
# 31 prospect oracle steps
PYTHONPATH=$PWD/src NUMBA_CACHE_DIR=/tmp/q40cache $P benchmarks/prospect_oracle_steps.py --sizes 20000 --chunks 32 --cases esrm:chi2 esrm:kl user:chi2 extremile:kl --base-src /tmp/q40_base/src --out /tmp/q40ps > /tmp/q40log/ps.txt 2>&1
echo "31ps $(date -u +%T) $(uptime)" >> /tmp/q40log/times.txt
