"""How closely this torch's Python Adam/AdamW can agree with LibTorch's C++ ones (the interop oracles).

In 1.13 both update the moments with mul_, add_ and addcmul_ and agree to the bit. Since 2.0 Python uses
lerp_ for them, and LibTorch 2.x's C++ Adam rounds otherwise than 1.13's too (against Python 1.13 and
2.15 alike, measured): only 1.13 against 1.13 is exact. CPP_TORCH is the C++ side's LibTorch version.
"""
import inspect

import torch

U = 2.0 ** -24  # float32's unit roundoff


CPP_TORCH = torch.__version__


def python_adam_matches_cpp():
    import torch.optim.adam as adam
    return "lerp_" not in inspect.getsource(adam) and int(CPP_TORCH.split(".")[0]) < 2


def adam_tolerance(steps, lr):
    """Absolute tolerance on a parameter after `steps` steps taken by the two formulas; 0 where they match.

    A moment updated by lerp_ or by mul_/add_ differs by a few roundings: at most ~30u relative to the moment
    (|grad| up to 1/(1-beta1) = 10 times it). A step moves a parameter by lr*m/(sqrt(v)+eps), at most ~3*lr
    over the first 10 steps, so the two steps differ by ~lr*3*(30u + 30u/2) = 135u*lr. 512u*lr per step
    covers that and what the moved parameters change in later gradients.
    """
    return 0.0 if python_adam_matches_cpp() else steps * lr * 512 * U


def moment_tolerance(steps, want):
    """Absolute tolerance on a moment tensor after `steps` differently rounded updates: 0 where they match,
    else 512u per step relative to the tensor's largest entry (entries near 0 carry the others' error)."""
    if python_adam_matches_cpp():
        return 0.0
    want = torch.as_tensor(want).double()
    return steps * 512 * U * (want.abs().max().item() if want.numel() else 0.0)


def within(got, want, atol):
    """Same dtype and shape, and equal (atol 0) or no entry further apart than atol."""
    got, want = torch.as_tensor(got), torch.as_tensor(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if atol == 0 or got.numel() == 0 or not got.is_floating_point():
        return torch.equal(got, want)
    return (got.double() - want.double()).abs().max().item() <= atol
