"""MLPerf Tiny (MLCommons' benchmark runner) against lowtide's firmware: the benchmarks, their datasets, and the
runner driving a board through a serial port it finds by USB VID:PID (docs/mlperf.md)."""
