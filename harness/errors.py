"""User-facing error types and the exit codes the CLI maps them to.

A SpecbenchError is a user mistake or an unmet requirement: the CLI prints its one-line message
and exits with its code, no traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    RUN_FAILED = 1  # at least one measured run failed (recorded as data)
    USAGE = 2  # bad input: scenario, arguments, files
    HARDWARE = 3  # the scenario needs hardware this machine lacks
    GATE_FAILED = 4  # a regression gate tripped
    INCOMPARABLE = 5  # results whose fingerprints or workloads differ
    PARITY = 6  # greedy outputs differ where the scenario expects them identical
    UNPROVEN = 7  # a launch or pass did not prove that its implementation ran in vLLM
    INCONCLUSIVE = 8  # a gated metric could not be decided (see --inconclusive)
    BUSY = 9  # another benchmark holds the machine and --no-wait was given
    INTERRUPTED = 130


class SpecbenchError(Exception):
    """A user-facing error: one line, no traceback."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ScenarioError(SpecbenchError):
    """The scenario file is missing, malformed or invalid (message names the field)."""


class HardwareError(SpecbenchError):
    """The scenario asks for hardware this machine does not have."""

    exit_code = ExitCode.HARDWARE


class ResultsError(SpecbenchError):
    """A results folder or file is missing, corrupt, or of an unsupported version."""


class IncomparableError(SpecbenchError):
    """Two result sets cannot be compared (fingerprint or workload mismatch)."""

    exit_code = ExitCode.INCOMPARABLE


class StorageError(SpecbenchError):
    """The results folder stopped taking writes mid-run (a full disk, a read-only mount): the
    run stopped, and its manifest says so where it could still be written."""

    exit_code = ExitCode.RUN_FAILED


class ProofRefused(RuntimeError):
    """A one-engine arm whose every warm-up pass failed its proof, refused before the first
    measured block (harness.engine.schedule.check_warmup_proof): its measured passes would all
    be discarded as unproven after the whole budget. The launch ends as a failure whose error
    starts with this class's name, and the run exits UNPROVEN, not RUN_FAILED."""

    @staticmethod
    def refused(error: str | None) -> bool:
        """Whether a launch's recorded error is this refusal."""
        return (error or "").startswith(f"{ProofRefused.__name__}:")
