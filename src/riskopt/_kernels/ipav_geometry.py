"""The geometry of ``incremental_pav``'s hull tree: the gap element of a node, the bridge of
two children's lower hulls (the Overmars-van Leeuwen simultaneous descent) and the tangent
walk to a hull vertex. Split out of ``incremental_pav`` (the state, its build / update /
query); the state ``S = (F, I, ex, ey, px, py, hv, hc, G)`` and its frames are described
there. Every function runs without reference counting (``_nrt=False``)."""
import numpy as np
from numba import njit


@njit(cache=True, _nrt=False, inline="always")
def _ipav_gap(u, h, B, NT):
    """Gap element of internal node ``u`` at level ``h``, and the first bucket of its right
    half."""
    rb = ((u - (NT >> h)) << h) + (1 << (h - 1))
    return rb * B - 1, rb


@njit(cache=True, _nrt=False, error_model="numpy")
def _ipav_bridge(u, h, S):
    """Bridge of the lower hulls of node ``u``'s two children (extents already refreshed);
    returns the number of descent steps.

    Simultaneous descent (Overmars-van Leeuwen) with a cursor on each child: ``v`` on the
    left (origin ``(vx, vy)`` in ``u``'s frame), ``w`` on the right. A cursor is a tree node
    (its current edge is the node's bridge, its halves are its children) or a bucket with a
    range ``[i0, i1]`` of its hull vertices (current edge: the middle one; a single vertex is
    a point). At each step the current edges ``ab`` and ``cd`` decide which half of ``v``
    and/or ``w`` holds the bridge's end point; restricting a side to a part that holds it
    keeps the bridge:

    * a point of one edge strictly below the other edge's line: the bridge slope is below
      slope(ab) (left half of ``v``) / above slope(cd) (right half of ``w``);
    * otherwise, if slope(ab) >= slope(cd), both edges lie on one supporting line: done;
    * otherwise the two lines cross at ``x0``: ``x0`` left of ``w``'s first point puts the
      end point of ``v`` right of ``b``, ``x0`` right of ``v``'s last candidate puts the end
      point of ``w`` left of ``c`` (one of the two holds);
    * one side a point: tangent from it to the other side's hull.

    Written out by hand (no helper calls: this is the hot loop).
    """
    F, I, ex, ey, px, py, hv, hc, G = S
    NT = F.shape[0]
    v = 2 * u
    vx = 0.0
    vy = 0.0
    vi0 = 0
    vi1 = 0
    w = 2 * u + 1
    wx = F[u, 2]
    wy = F[u, 3]
    wi0 = 0
    wi1 = 0
    while w < NT and F[w, 5] != F[w, 5]:  # pass-through
        w = 2 * w
    if v >= NT:
        vi1 = hc[v - NT] - 1
    if w >= NT:
        wi1 = hc[w - NT] - 1
    steps = 0
    vload = True
    wload = True
    ax = ay = bx = by = vmax = 0.0
    cx = cy = dx = dy = wmin = 0.0
    va = vb = wc = wd = 0
    vp = wp = False
    while True:
        steps += 1
        if vload:
            vload = False
            if v < NT:
                vp = False
                ax = vx + F[v, 4]
                ay = vy + F[v, 5]
                bx = vx + F[v, 6]
                by = vy + F[v, 7]
                vmax = vx + F[v, 0] + F[v, 2]
            else:
                bk = v - NT
                if vi0 == vi1:
                    vp = True
                    va = hv[bk, vi0]
                    ax = vx + px[va]
                    ay = vy + py[va]
                else:
                    vp = False
                    mid = (vi0 + vi1) >> 1
                    va = hv[bk, mid]
                    vb = hv[bk, mid + 1]
                    ax = vx + px[va]
                    ay = vy + py[va]
                    bx = vx + px[vb]
                    by = vy + py[vb]
                    vmax = vx + px[hv[bk, vi1]]
        if wload:
            wload = False
            if w < NT:
                wp = False
                cx = wx + F[w, 4]
                cy = wy + F[w, 5]
                dx = wx + F[w, 6]
                dy = wy + F[w, 7]
                wmin = wx
            else:
                bk = w - NT
                if wi0 == wi1:
                    wp = True
                    wc = hv[bk, wi0]
                    cx = wx + px[wc]
                    cy = wy + py[wc]
                else:
                    wp = False
                    mid = (wi0 + wi1) >> 1
                    wc = hv[bk, mid]
                    wd = hv[bk, mid + 1]
                    cx = wx + px[wc]
                    cy = wy + py[wc]
                    dx = wx + px[wd]
                    dy = wy + py[wd]
                    wmin = wx + px[hv[bk, wi0]]
        vleft = False
        vright = False
        wleft = False
        wright = False
        if vp:
            if wp:
                I[u, 0] = va
                I[u, 1] = wc
                F[u, 4] = ax
                F[u, 5] = ay
                F[u, 6] = cx
                F[u, 7] = cy
                return steps
            # tangent from the point a to the hull of w: right iff slope(a, c) > slope(cd)
            if (cy - ay) * (dx - cx) > (dy - cy) * (cx - ax):
                wright = True
            else:
                wleft = True
        elif wp:
            # tangent from the point c to the hull of v: right iff slope(ab) < slope(b, c)
            if (by - ay) * (cx - bx) < (cy - by) * (bx - ax):
                vright = True
            else:
                vleft = True
        else:
            dxl = bx - ax
            dyl = by - ay
            dxr = dx - cx
            dyr = dy - cy
            vleft = (dxl * (cy - ay) < dyl * (cx - ax)) or (dxl * (dy - ay) < dyl * (dx - ax))
            wright = (dxr * (ay - cy) < dyr * (ax - cx)) or (dxr * (by - cy) < dyr * (bx - cx))
            if not vleft and not wright:
                if dyl * dxr >= dyr * dxl:
                    if v < NT:
                        va = I[v, 0]
                    if w < NT:
                        wd = I[w, 1]
                    I[u, 0] = va
                    I[u, 1] = wd
                    F[u, 4] = ax
                    F[u, 5] = ay
                    F[u, 6] = dx
                    F[u, 7] = dy
                    return steps
                ml = dyl / dxl
                mr = dyr / dxr
                vright = cy + mr * (wmin - cx) > ay + ml * (wmin - ax)
                wleft = cy + mr * (vmax - cx) < ay + ml * (vmax - ax)
                if not vright and not wleft:
                    wleft = True
        if vleft or vright:
            vload = True
            if v < NT:
                if vright:
                    vx += F[v, 2]
                    vy += F[v, 3]
                    v = 2 * v + 1
                else:
                    v = 2 * v
                if v >= NT:
                    vi0 = 0
                    vi1 = hc[v - NT] - 1
            else:
                mid = (vi0 + vi1) >> 1
                if vright:
                    vi0 = mid + 1
                else:
                    vi1 = mid
        if wleft or wright:
            wload = True
            if w < NT:
                if wright:
                    wx += F[w, 2]
                    wy += F[w, 3]
                    w = 2 * w + 1
                else:
                    w = 2 * w
                while w < NT and F[w, 5] != F[w, 5]:
                    w = 2 * w
                if w >= NT:
                    wi0 = 0
                    wi1 = hc[w - NT] - 1
            else:
                mid = (wi0 + wi1) >> 1
                if wright:
                    wi0 = mid + 1
                else:
                    wi1 = mid


@njit(cache=True, _nrt=False, error_model="numpy")
def _ipav_walk(c, h, k, S):
    """``(x, y, lo, hi)``: coordinates of point ``k`` in the frame of tree node / bucket ``c``
    (level ``h``) and the interval of slopes ``m`` for which ``k`` is the tangent point of
    slope ``m`` of ``c``'s hull (empty, ``lo > hi``, when ``k`` is not a hull vertex).

    The path to ``k`` is fixed by the index (no data-dependent branching, so the loads
    overlap); the tangent query of slope ``m`` walks it iff ``m >= slope(bridge)`` at every
    node where it goes right, ``m <= slope(bridge)`` where it goes left, and ``m`` lies
    between the slopes of the bucket-hull edges around ``k``.
    """
    F, I, ex, ey, px, py, hv, hc, G = S
    NT = F.shape[0]
    B = hv.shape[1]
    x = 0.0
    y = 0.0
    lo = -np.inf
    hi = np.inf
    while c < NT:
        if F[c, 5] == F[c, 5]:
            sz = (F[c, 7] - F[c, 5]) / (F[c, 6] - F[c, 4])
            M = _ipav_gap(c, h, B, NT)[0]
            if k > M:
                if sz > lo:
                    lo = sz
                x += F[c, 2]
                y += F[c, 3]
                c = 2 * c + 1
                h -= 1
                continue
            if sz < hi:
                hi = sz
        c = 2 * c
        h -= 1
    b = c - NT
    i0 = 0
    i1 = hc[b] - 1
    while i0 < i1:  # position of k among the bucket's hull vertices
        mid = (i0 + i1 + 1) >> 1
        if hv[b, mid] <= k:
            i0 = mid
        else:
            i1 = mid - 1
    if hv[b, i0] != k:
        return x + px[k], y + py[k], np.inf, -np.inf
    if i0 > 0:
        j = hv[b, i0 - 1]
        sz = (py[k] - py[j]) / (px[k] - px[j])
        if sz > lo:
            lo = sz
    if i0 < hc[b] - 1:
        j = hv[b, i0 + 1]
        sz = (py[j] - py[k]) / (px[j] - px[k])
        if sz < hi:
            hi = sz
    return x + px[k], y + py[k], lo, hi
