"""Results remembered per argument object: for a function of one object that is costly to derive again and
is asked about the same object many times (a plan's step context, a serving run's target model), where
hashing the object by value would cost more than the work saved."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

_In = TypeVar("_In")
_Out = TypeVar("_Out")


def by_identity(maxsize: int) -> Callable[[Callable[[_In], _Out]], Callable[[_In], _Out]]:
    """`function(obj)` remembered per `obj` by identity, for the `maxsize` objects asked about last (the
    oldest forgotten first). Each object is kept beside its answer, so its id is not reused while
    remembered."""

    def decorate(function: Callable[[_In], _Out]) -> Callable[[_In], _Out]:
        answers: dict[int, tuple[_In, _Out]] = {}

        @functools.wraps(function)
        def remembered(obj: _In) -> _Out:
            known = answers.get(id(obj))
            if known is not None and known[0] is obj:
                return known[1]
            if len(answers) >= maxsize:
                answers.pop(next(iter(answers)))
            answer = function(obj)
            answers[id(obj)] = (obj, answer)
            return answer

        return remembered

    return decorate


__all__ = ["by_identity"]
