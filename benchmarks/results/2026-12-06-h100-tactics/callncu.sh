#!/bin/bash
# calls 2-4: ORT chunk $1; ncu of the default M=1 GEMV on shape $2 block $3 (what it waits on)
cp .ort2/$1 /tmp/ortp/ || exit 1
export PYTHONPATH=/tmp/site:$PWD
for sb in $2; do s=${sb%g*}; g=${sb#*g}
timeout 140 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --launch-skip 20 --launch-count 1 python3 -m benchmarks.kernel_time --shape $s --block $g > $OUT/ncu_${s}_g$g.txt 2>&1
grep -E "^  [a-z_0-9]+|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Grid Size|Block Size|Stall|Warp Cycles Per Issued|Eligible|Issued Warp|L2 Hit|L1/TEX Hit|Waves" $OUT/ncu_${s}_g$g.txt | head -40
done
