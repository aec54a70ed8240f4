"""The stage above the device layer, composing the stages before it into what a command does: `optimize` (schedule,
placement, rewrite, export and the checks on the host TFLM). This package imports nothing itself."""
