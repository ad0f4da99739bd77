import os
import pathlib

import pytest

HERE = pathlib.Path(__file__).resolve().parent
# The corpus: BSOR_CORPUS, or ../shared/corpus beside the repository (python/tests is two
# levels below the repository's root).
CORPUS = pathlib.Path(
    os.environ.get("BSOR_CORPUS") or HERE.parent.parent.parent / "shared" / "corpus"
)


def corpus_files(pattern):
    if not CORPUS.is_dir():
        return []
    return sorted(CORPUS.glob(pattern))


def pytest_report_header(config):
    if not CORPUS.is_dir():
        return (
            f"NOTICE: no corpus at {CORPUS} (set BSOR_CORPUS): "
            "the tests on real replays are skipped"
        )
    return f"corpus: {CORPUS}"


@pytest.fixture(scope="session")
def corpus():
    if not CORPUS.is_dir():
        print(f"NOTICE: no corpus at {CORPUS}: skipped")
        pytest.skip(f"no corpus at {CORPUS} (set BSOR_CORPUS)")
    return CORPUS
