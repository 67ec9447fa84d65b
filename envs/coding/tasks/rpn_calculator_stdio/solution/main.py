import sys


def evaluate(line):
    stack = []
    for token in line.split():
        if token in ("+", "-", "*", "/"):
            if len(stack) < 2:
                raise ValueError("too few operands")
            b, a = stack.pop(), stack.pop()
            if token == "+":
                stack.append(a + b)
            elif token == "-":
                stack.append(a - b)
            elif token == "*":
                stack.append(a * b)
            else:
                quotient = abs(a) // abs(b)
                stack.append(quotient if (a < 0) == (b < 0) else -quotient)
        else:
            stack.append(int(token))
    if len(stack) != 1:
        raise ValueError("bad expression")
    return stack[0]


for line in sys.stdin:
    if line.strip():
        try:
            print(evaluate(line))
        except (ValueError, ZeroDivisionError):
            print("error")
