import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

Source = Union[str, os.PathLike[str], bytes, bytearray, memoryview]

REPLAY_SUFFIXES: Tuple[str, ...]

class ReplayError(ValueError):
    section: Optional[str]
    offset: Optional[int]
    path: Optional[str]
    def __init__(
        self,
        message: str,
        section: Optional[str] = ...,
        offset: Optional[int] = ...,
        path: Optional[str] = ...,
    ) -> None: ...

class Replay:
    info: Dict[str, Any]
    frames: Optional[Dict[str, npt.NDArray[Any]]]
    notes: Dict[str, npt.NDArray[Any]]
    walls: Dict[str, npt.NDArray[Any]]
    heights: Dict[str, npt.NDArray[np.float32]]
    pauses: Dict[str, npt.NDArray[Any]]
    controller_offsets: Optional[npt.NDArray[np.float32]]
    user_data: Optional[bytes]
    trailing: bytes
    format: str
    profile: Optional[str]
    complete: bool
    damage: List[Tuple[int, str]]
    frame_count: int
    def __init__(self, d: Dict[str, Any]) -> None: ...
    def to_bsor(self) -> bytes: ...
    def to_pandas(self) -> Dict[str, Any]: ...
    def to_arrow(self) -> Dict[str, Any]: ...

def load(src: Source) -> Replay: ...
def load_events(src: Source) -> Replay: ...
def load_many(
    src: Union[Source, Iterable[Source]],
    threads: Optional[int] = ...,
    events_only: bool = ...,
    batch: Optional[int] = ...,
) -> Iterator[Tuple[str, Union[Replay, ReplayError]]]: ...
def encode(replay: Replay, profile: str = ..., archive: bool = ...) -> bytes: ...
def to_parquet(src: Any, out: str, threads: Optional[int] = ...) -> Dict[str, int]: ...
def reuse_freed_memory(trim_threshold: int = ...) -> bool: ...
