"""The stage above the device layer, composing the stages before it into what a command does: `optimize` (schedule,
placement, rewrite, export and the checks on the host TFLM), `firmware` (a board's image with a model in it, and
whether the model fits the board), `measure` (the expected outputs and predicted figures, the image built, handed to
lowtide.device to run and compare), and `host_tflm`, the host-tflm board's process (the host TFLM behind the
lowtide protocol). This package imports nothing itself."""
