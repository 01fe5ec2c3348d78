"""One error type for bad user input.

Every function that takes user input (a preset name, a path, a capability, a KV-cache dtype, a tensor
handed to the public kernel API) raises :class:`UserInputError` with one line that names the bad value
and what is accepted. ``sparse-mla`` prints that line and exits with status 2, without a traceback.
"""


class UserInputError(ValueError):
    """Bad input: the message names the offending value and what would be accepted."""
