"""The optional C extension loaders._jpegroi (libjpeg-turbo's crop and skip: a crop at load time
decodes only its box; see loaders/_jpegroi.c). Everything else is in pyproject.toml. Without a C
compiler or libjpeg-turbo's headers (Debian/Ubuntu: libjpeg-dev) the build skips it, and the
loaders decode whole images with simplejpeg instead."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "loaders._jpegroi",
            ["loaders/_jpegroi.c"],
            libraries=["jpeg"],
            extra_compile_args=["-O2", "-Werror=implicit-function-declaration"],
            optional=True,
        )
    ]
)
