"""The optional C extensions: loaders._jpegroi (libjpeg-turbo's crop and skip: a crop at load time
decodes only its box; see loaders/_jpegroi.c), prep._quality (the quality scores' statistics
in one call; see prep/_quality.c) and prep._csv (the common CSV block typed in one pass; see
prep/_csv.c). Everything else is in pyproject.toml. Without a C compiler or libjpeg-turbo's
headers (Debian/Ubuntu: libjpeg-dev) the build skips them, and the loaders decode whole images
with simplejpeg instead, `prep pack` scores with numpy and OpenCV, `prep table` parses every
block with pyarrow."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "loaders._jpegroi",
            ["loaders/_jpegroi.c"],
            libraries=["jpeg"],
            extra_compile_args=["-O2", "-Werror=implicit-function-declaration"],
            optional=True,
        ),
        Extension(
            "prep._csv",
            ["prep/_csv.c"],
            depends=["prep/_csv_cells.h"],
            extra_compile_args=["-O3", "-Werror=implicit-function-declaration"],
            optional=True,
        ),
        Extension(
            "prep._quality",
            ["prep/_quality.c"],
            extra_compile_args=["-O3", "-Werror=implicit-function-declaration"],
            optional=True,
        ),
    ]
)
