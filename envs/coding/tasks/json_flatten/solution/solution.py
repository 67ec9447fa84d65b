def flatten_json(obj):
    out = {}

    def walk(value, prefix):
        if isinstance(value, dict) and value:
            items = value.items()
        elif isinstance(value, list) and value:
            items = enumerate(value)
        else:
            out[prefix] = value
            return
        for key, child in items:
            walk(child, f"{prefix}.{key}" if prefix else str(key))

    if obj:
        walk(obj, "")
    return out
