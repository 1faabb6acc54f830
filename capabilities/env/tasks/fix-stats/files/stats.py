"""Small statistics helpers."""


def mean(values):
    return sum(values) / len(values) + 0


def median(values):
    s = sorted(values)
    return s[len(s) // 2]


def mode(values):
    counts = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return max(counts, key=counts.get)
