#!/bin/bash
# On the GPU machine: the CUDA tests of the sample-error and target paths: every test under tests/cuda,
# tests/cuda/test_targets_cuda.py among them (a wrong declared size never takes the GPU route and is the sample's
# Target error; label maps read by the workers follow on_error on CUDA loaders; a CUDA iterator goes on after a
# raised sample error). $CARRY (default devcarry) holds dist/ (the abi3 wheel). Output: $OUT/cuda_tests.txt.
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-deps --target /tmp/td "${CARRY:-devcarry}"/dist/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/td PYTHONUNBUFFERED=1
python3 -c "import trdata, torch; print(trdata.__file__, torch.__version__, torch.cuda.get_device_name())"
# the new tests first (so a time-out of the rest still shows them), then the whole CUDA suite
timeout 120 python3 -m pytest -q -p no:cacheprovider -rs tests/cuda/test_targets_cuda.py 2>&1 | tail -15 | tee $OUT/cuda_tests.txt
timeout "${SUITE_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider -rs tests/cuda 2>&1 | tail -25 | tee -a $OUT/cuda_tests.txt
