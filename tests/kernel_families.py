"""The kernel families of the GPU test modules: a module's ``KERNEL_FAMILIES`` maps a
test's name to the parameters that pick a case's kernels and a function of them
giving those kernels, so that a selection's kernels compile together, before the
first case runs and ahead on any machine (scripts/precompile_tests.py)."""

from __future__ import annotations


def selected_kernels(items, module, test_name: str | None = None) -> list:
    """The kernels the selected ``items`` of ``module`` run, each once: those of the
    family ``test_name``, or of every family in the module's KERNEL_FAMILIES."""
    names = [test_name] if test_name else list(module.KERNEL_FAMILIES)
    kernels = []
    for name in names:
        parameters, kernels_of = module.KERNEL_FAMILIES[name]
        cases = {tuple(item.callspec.params[p] for p in parameters) for item in items
                 if item.module is module and getattr(item, "originalname", "") == name}
        kernels += [spec for case in cases for spec in kernels_of(*case)]
    return list(dict.fromkeys(kernels))
