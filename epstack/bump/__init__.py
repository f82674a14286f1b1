"""Moving pins: what upstream has (outdated, upstream, groups), a bump proven and applied (plan, report),
and its pull request (branch, forge). Above image/ and python/, whose renders and locks it drives."""
