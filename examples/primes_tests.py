def check(candidate):
    assert candidate(10) == [2, 3, 5, 7]
    assert candidate(2) == [2]
    assert candidate(1) == []
    assert candidate(30)[-1] == 29
