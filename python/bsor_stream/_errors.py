"""The exception every reader and writer of bsor_stream raises for bad input."""


class ReplayError(ValueError):
    """A replay that cannot be read: what is wrong and where.

    Attributes:
        section: the part of the file being read (``"frames"``, ``"notes"``,
            ``"stream header"``, ``"frames"`` of an XROR...), or None.
        offset: the byte offset from the start of the file, or None when unknown.
        path: the file's path, for a file read from disk, else None.
    """

    def __init__(self, message, section=None, offset=None, path=None):
        super().__init__(message)
        self.section = section
        self.offset = offset
        self.path = path
