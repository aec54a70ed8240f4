"""`pio test -e qemu-m4` (or qemu-m7): boots each test image in QEMU and reads its verdicts.

A test image prints one line per case on UART0, `PASS name` or `FAIL name: why`, then exits QEMU through
semihosting with the number of failures. QEMU runs with the board's own command line from boards/*.toml (the one
`lowtide measure` uses), UART0 moved to stdout, under a time limit, so a hung or crashed image ends as an error
instead of a hang. PlatformIO builds the image first (this platform has no uploader: no upload stage).
"""

import os
import re
import subprocess
import tomllib
from pathlib import Path

from platformio.test.result import TestCase, TestStatus
from platformio.test.runners.base import TestRunnerBase

TIME_LIMIT_S = 60
VERDICT = re.compile(r"^(PASS|FAIL) (\S+)(?:: (.*))?$")
FAULT_EXIT = 0xFA  # lt_startup.c: any fault exits QEMU with this status


class CustomTestRunner(TestRunnerBase):
    def stage_testing(self):
        if self.options.without_testing:
            return
        env_name = self.test_suite.env_name
        elf = os.path.join(self.project_config.get("platformio", "build_dir"), env_name, "firmware.elf")
        command = self._emulator_command(env_name, elf)
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=TIME_LIMIT_S,
            )
        except subprocess.TimeoutExpired as exc:
            self._output(exc.stdout or b"")
            self._error(f"test image did not finish within {TIME_LIMIT_S} s")
            return
        self._output(done.stdout)
        if done.returncode == FAULT_EXIT:
            self._error("test image faulted (exit status 0xFA)")
        elif not self.test_suite.cases:
            self._error(f"test image reported no test cases (exit status {done.returncode})")
        elif done.returncode != sum(c.status == TestStatus.FAILED for c in self.test_suite.cases):
            self._error(f"exit status {done.returncode} disagrees with the failures reported")

    def _emulator_command(self, env_name, elf):
        boards_dir = Path(self.project_config.path).parent / "boards"
        for path in sorted(boards_dir.glob("*.toml")):
            board = tomllib.loads(path.read_text())
            if board["platformio_env"] == env_name and "emulator" in board:
                command = [part.replace("{elf}", elf) for part in board["emulator"]["command"]]
                command[command.index("-serial") + 1] = "stdio"
                return command
        raise RuntimeError(f"no boards/*.toml file describes an emulator for env {env_name}")

    def _output(self, data):
        self.on_testing_data_output(data)
        if self._testing_output_buffer:
            self.on_testing_line_output(self._testing_output_buffer + "\n")
            self._testing_output_buffer = ""

    def _error(self, message):
        self.test_suite.add_case(
            TestCase(
                f"{self.test_suite.test_name}:image",
                TestStatus.ERRORED,
                message=message,
                exception=RuntimeError(message),
            )
        )

    def on_testing_line_output(self, line):
        super().on_testing_line_output(line)
        match = VERDICT.match(line.strip())
        if match:
            status = TestStatus.PASSED if match.group(1) == "PASS" else TestStatus.FAILED
            self.test_suite.add_case(TestCase(match.group(2), status, message=match.group(3)))
