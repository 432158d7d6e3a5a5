"""The one error type user-facing code raises for bad input: the CLI prints it as one line, exit 2."""

# The exit status of a run stopped by Ctrl-C (SIGINT), as shells report it: 128 + 2.
EXIT_INTERRUPTED = 130


class InputError(Exception):
    """Bad input or usage: a missing or unreadable file, a trace that is not an nsys export, an
    unknown preset. The message is one line that says what is wrong and, where it helps, what to do."""


class NoGpuKernels(InputError):
    """A trace that holds no GPU kernel. `cuda_traced`: its CUDA API calls were captured (the
    program ran and launched nothing), not a capture made without --trace=cuda or off a GPU."""

    def __init__(self, message: str, cuda_traced: bool):
        super().__init__(message)
        self.cuda_traced = cuda_traced
