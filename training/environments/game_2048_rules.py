"""The rules of 2048 on a square board, as pure functions (no model, no I/O)."""
from __future__ import annotations

import random

Board = list[list[int]]
MOVES = ("left", "right", "up", "down")


def new_board(size: int, rng: random.Random) -> Board:
    board = [[0] * size for _ in range(size)]
    spawn(board, rng)
    spawn(board, rng)
    return board


def spawn(board: Board, rng: random.Random) -> None:
    empty = [(r, c) for r, row in enumerate(board) for c, v in enumerate(row) if v == 0]
    if empty:
        r, c = rng.choice(empty)
        board[r][c] = 4 if rng.random() < 0.1 else 2


def _slide_row_left(row: list[int]) -> tuple[list[int], int]:
    tiles = [v for v in row if v]
    out: list[int] = []
    gained = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] * 2)
            gained += tiles[i] * 2
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(row) - len(out)), gained


def _transpose(board: Board) -> Board:
    return [list(col) for col in zip(*board)]


def slide(board: Board, move: str) -> tuple[Board, int]:
    """The board after `move` (before a new tile spawns) and the points gained by merges."""
    if move not in MOVES:
        raise ValueError(f"unknown move {move!r}")
    grid = _transpose(board) if move in ("up", "down") else [row[:] for row in board]
    if move in ("right", "down"):
        grid = [row[::-1] for row in grid]
    results = [_slide_row_left(row) for row in grid]
    grid = [row for row, _ in results]
    if move in ("right", "down"):
        grid = [row[::-1] for row in grid]
    if move in ("up", "down"):
        grid = _transpose(grid)
    return grid, sum(g for _, g in results)


def legal_moves(board: Board) -> list[str]:
    return [m for m in MOVES if slide(board, m)[0] != board]


def max_tile(board: Board) -> int:
    return max(max(row) for row in board)


def render(board: Board) -> str:
    return "\n".join(" ".join(str(v) if v else "." for v in row) for row in board)
