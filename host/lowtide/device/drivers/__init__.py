"""The ways lowtide reaches a board, each on its own (labgrid's drivers): `platformio` builds and uploads firmware,
`qemu` boots it in an emulator, `serialport` finds and opens a serial port, `process` runs a board process on this
machine (host-tflm), `labgrid` acquires a place in a board farm. Boards (`lowtide.device.boards`) compose them."""
