"""Build configuration that pyproject.toml cannot express: the data an installed fasttrack reads.

The suites, the demo model's builder, the report templates and the JSON Schemas stay where they
are in the repository (``suites/``, ``examples/demo_model/``, ``templates/``, ``schemas/``). A wheel
carries a copy of each under ``fasttrack/_shipped/``, in the same layout, so a path that is
relative in the repository (a scope's ``../../examples/demo_model/build.py``) holds in the wheel
too; ``fasttrack.ROOT`` points there when the package is not run from a source checkout.
Everything else (metadata, dependencies, scripts) is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

#: Package name in the wheel -> the repository folder it is built from.
SHIPPED = {
    "fasttrack._shipped.suites": "suites",
    "fasttrack._shipped.examples.demo_model": "examples/demo_model",
    "fasttrack._shipped.templates": "templates",
    "fasttrack._shipped.schemas": "schemas",
}

setup(
    # namespace packages too (a folder of modules without __init__.py), as pyproject's packages.find finds them
    packages=find_namespace_packages(include=["fasttrack", "fasttrack.*"], exclude=["*.__pycache__"]) + sorted(SHIPPED),
    package_dir=SHIPPED,
    package_data={name: ["**/*"] for name in SHIPPED},
    include_package_data=False,  # only what package_data names (no MANIFEST.in or VCS file lists)
    # fnmatch's '*' spans folders: these drop byte code at any depth
    exclude_package_data={name: ["*.pyc", "*/__pycache__/*"] for name in SHIPPED},
)
