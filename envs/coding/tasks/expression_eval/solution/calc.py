import re

_TOKEN = re.compile(r"\s*(?:(\d+\.\d+|\d+)|(.))")


def _tokenize(expr):
    tokens = []
    for number, op in _TOKEN.findall(expr):
        if number:
            tokens.append(float(number) if "." in number else int(number))
        elif op.strip():
            if op not in "+-*/()":
                raise ValueError(f"unexpected character {op!r}")
            tokens.append(op)
    return tokens


class _Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self):
        token = self.peek()
        self.pos += 1
        return token

    def expr(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self):
        value = self.factor()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value = value * self.factor()
            else:
                value = value / self.factor()
        return value

    def factor(self):
        token = self.take()
        if token == "-":
            return -self.factor()
        if token == "+":
            return self.factor()
        if token == "(":
            value = self.expr()
            if self.take() != ")":
                raise ValueError("missing )")
            return value
        if isinstance(token, int | float):
            return token
        raise ValueError(f"unexpected token {token!r}")


def evaluate(expr):
    parser = _Parser(_tokenize(expr))
    value = parser.expr()
    if parser.peek() is not None:
        raise ValueError(f"unexpected token {parser.peek()!r}")
    return value
