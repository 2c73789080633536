"""A software prefetch for numba kernels (``llvm.prefetch``: a hint, never changes a value).

Stochastic kernels touch a random row per step; at large n that row, its table entries and
its target come from memory (~100 ns each, in sequence when the step's arithmetic depends on
them). Prefetching the next step's entries one step ahead overlaps those misses with the
current step's work.
"""
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


@intrinsic
def _prefetch(typingctx, arr, i, j):
    """Prefetch element ``arr[i]`` (1-d; ``j`` ignored) or ``arr[i, j]`` (2-d) for reading."""
    if (not isinstance(arr, types.Array) or arr.ndim not in (1, 2)
            or not isinstance(i, types.Integer) or not isinstance(j, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = [context.cast(builder, args[1], sig.args[1], types.intp)]
        if aryty.ndim == 2:
            idx.append(context.cast(builder, args[2], sig.args[2], types.intp))
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data,
                                        shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides),
                                        layout=aryty.layout, inds=idx)
        i8p = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # read, high temporal locality, data cache
        builder.call(fn, [i8p, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, i, j), codegen
