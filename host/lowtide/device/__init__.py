"""Measuring on boards, in labgrid's shape: board files as typed specs (`spec`), the ways of reaching a board
(`drivers`: PlatformIO, QEMU, serial ports, a host process, labgrid places), boards composed from them (`boards`),
the serial protocol (`protocol_spec`, its one definition; `protocol`, the codec; `session`, the host's requests),
byte links (`transport`), run locks (`locking`), and `measure.run_on_board`, which runs a model on a board and
compares what it reports with what it is handed (lowtide.pipeline computes that and builds the image). This package
imports nothing itself, so a light module (the protocol, the locks) loads without the boards."""
