"""The test harness's ROS domains: each pytest-xdist worker in a block of its own."""

import pytest
import ros_harness
from ros_harness import domain_block, MAX_DOMAIN, MIN_BLOCK


@pytest.mark.parametrize('workers', [1, 2, 3, 4])
def test_the_workers_blocks_are_disjoint_and_fast_dds_takes_every_domain(workers):
    # Three workers shared a block before (a block of 100 per gw index mod 2): the demo's
    # node counted 16 clouds of a 15-cloud bag, one from the other worker's test.
    blocks = [domain_block(f'gw{k}', workers) for k in range(max(2, workers))]
    domains = [set(range(first, first + size)) for first, size in blocks]
    assert sum(map(len, domains)) == len(set().union(*domains))
    assert all(size >= MIN_BLOCK and max(d) <= MAX_DOMAIN
               for (_, size), d in zip(blocks, domains))
    if workers <= 2:
        assert blocks == [(0, 100), (100, 100)]     # make test's two: as before
    # A restarted worker (xdist names it anew) takes the block of the one it replaces.
    assert domain_block(f'gw{max(2, workers)}', workers) == blocks[0]


@pytest.mark.parametrize('workers', [2, 4])
def test_other_domains_stay_in_the_workers_block_and_off_its_own(workers, monkeypatch):
    # Before, the last domain of gw0's block could be gw1's own (100).
    for worker in ('gw0', 'gw1'):
        first, size = domain_block(worker, workers)
        monkeypatch.setattr(ros_harness, 'DOMAIN_BLOCK', first)
        monkeypatch.setattr(ros_harness, 'DOMAIN_BLOCK_SIZE', size)
        for own in range(first, first + size):
            monkeypatch.setenv('ROS_DOMAIN_ID', str(own))
            others = {ros_harness.other_domain(offset) for offset in range(MIN_BLOCK - 1)}
            assert own not in others and len(others) == MIN_BLOCK - 1
            assert all(first <= d < first + size for d in others)


def test_too_many_workers_for_the_domains_is_one_clear_error():
    with pytest.raises(RuntimeError, match=r'at most 4 pytest-xdist workers: each needs 48 '
                                           r'ROS domains of its own \(Fast DDS stops at 232\), '
                                           r'got 5'):
        domain_block('gw0', 5)
