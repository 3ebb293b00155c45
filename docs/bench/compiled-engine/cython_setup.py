from Cython.Build import cythonize
from setuptools import setup

setup(
    ext_modules=cythonize(
        ["fluvial/records.py", "fluvial/serdes.py", "fluvial/processor/task.py"],
        compiler_directives={"language_level": 3, "annotation_typing": False},
        nthreads=1,
    ),
    script_args=["build_ext", "--inplace"],
)
