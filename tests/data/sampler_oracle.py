"""Prints torch.utils.data.DistributedSampler's indices for many argument
combinations, one line each: n R rank seed epoch drop_last shuffle : indices.
Used as the oracle by test_distributed_sampler (python3-torch)."""
import itertools

from torch.utils.data.distributed import DistributedSampler

for n, R, seed, epoch, drop_last, shuffle in itertools.product(
        [1, 2, 10, 17, 100, 1001], [1, 2, 3, 4, 7], [0, 1, 42], [0, 3], [False, True], [True, False]):
    for rank in range(R):
        s = DistributedSampler(list(range(n)), num_replicas=R, rank=rank, shuffle=shuffle, seed=seed,
                               drop_last=drop_last)
        s.set_epoch(epoch)
        idx = list(s)
        assert len(idx) == len(s)
        print(n, R, rank, seed, epoch, int(drop_last), int(shuffle), ":", *idx)
