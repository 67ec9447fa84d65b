import heapq
import itertools


def shortest_path(graph, start, goal):
    best = {start: 0}
    previous = {}
    tie = itertools.count()
    queue = [(0, next(tie), start)]
    done = set()
    while queue:
        cost, _, node = heapq.heappop(queue)
        if node in done:
            continue
        done.add(node)
        if node == goal:
            path = [node]
            while path[-1] != start:
                path.append(previous[path[-1]])
            return cost, path[::-1]
        for nxt, weight in graph.get(node, {}).items():
            new = cost + weight
            if nxt not in best or new < best[nxt]:
                best[nxt] = new
                previous[nxt] = node
                heapq.heappush(queue, (new, next(tie), nxt))
    return float("inf"), []
