"""The optional C extensions: loaders._jpegroi (libjpeg-turbo's crop and skip: a crop at load time
decodes only its box; see loaders/_jpegroi.c), prep._quality (the quality scores' statistics
in one call; see prep/_quality.c) and prep._csv (the common CSV block typed in one pass; see
prep/_csv.c). Everything else is in pyproject.toml. Without a C compiler or libjpeg-turbo's
headers (Debian/Ubuntu: libjpeg-dev) the build skips them, and the loaders decode whole images
with simplejpeg instead, `prep pack` scores with numpy and OpenCV, `prep table` parses every
block with pyarrow."""

from setuptools import Extension, setup


def optional_c(name: str, source: str, level: str = "-O3", **kw: list[str]) -> Extension:
    """An extension the build leaves out where it cannot compile it."""
    args = [level, "-Werror=implicit-function-declaration"]
    return Extension(name, [source], extra_compile_args=args, optional=True, **kw)


setup(
    ext_modules=[
        optional_c("loaders._jpegroi", "loaders/_jpegroi.c", "-O2", libraries=["jpeg"]),
        optional_c("prep._csv", "prep/_csv.c", depends=["prep/_csv_cells.h"]),
        optional_c("prep._quality", "prep/_quality.c"),
    ]
)
