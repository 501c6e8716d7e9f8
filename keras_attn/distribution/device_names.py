"""Device names given by the user, checked on every backend."""


def check_each_device_once(devices, canonical):
    """Refuses two names of one device (`"cpu:0"` and `"CPU:0"`).

    Args:
        devices: the names as the user gave them.
        canonical: the backend's name of each, in the same order.
    """
    seen = {}
    for name, device in zip(devices, canonical):
        if device in seen:
            raise ValueError(
                "`devices` must name each device once; "
                f"{seen[device]!r} and {name!r} are the same device ({device}). "
                f"Received: devices={devices!r}"
            )
        seen[device] = name
