import argparse


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def main():
    parser = argparse.ArgumentParser(description="Greet people.")
    parser.add_argument("names", nargs="+", metavar="NAME")
    parser.add_argument("--greeting", default="Hello")
    parser.add_argument("--shout", action="store_true")
    parser.add_argument("--repeat", type=positive_int, default=1)
    args = parser.parse_args()
    for name in args.names:
        line = f"{args.greeting}, {name}!"
        for _ in range(args.repeat):
            print(line.upper() if args.shout else line)


if __name__ == "__main__":
    main()
