"""tlgemm.testing's poison: every element of a poisoned tensor reads as not written."""

import pytest
import torch

from tlgemm.testing import poison_, poisoned


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.int32, torch.int8], ids=str)
def test_poison_fills_every_element(dtype):
    t = torch.zeros(3, 5, dtype=dtype)
    assert poison_(t) is t
    for x in (t, poisoned((3, 5), dtype, "cpu")):
        assert x.dtype == dtype and x.shape == (3, 5)
        if dtype.is_floating_point:
            assert torch.isnan(x.float()).all()
        else:
            assert (x == torch.iinfo(dtype).min).all()
