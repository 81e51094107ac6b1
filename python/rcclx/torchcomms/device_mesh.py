"""torchcomms.device_mesh over rcclx: a torch.distributed process group from a TorchComm.

_create_torchcomm_process_group(comm, group_name) gives an rcclx.distributed.ProcessGroupRcclx over
the TorchComm's communicator; it is not entered in torch.distributed's registry of groups (pass it
as group=... to torch.distributed's functions). init_device_mesh (DeviceMesh, DTensor) is not
implemented by rcclx.
"""
__all__ = ["init_device_mesh"]


def _create_torchcomm_process_group(comm, group_name, backend_str="torchcomm", global_ranks_mapping=None):
    from ..distributed import ProcessGroupRcclx
    pg = ProcessGroupRcclx.from_communicator(comm.unsafe_get_backend())
    pg._rcclx_group_name = group_name
    return pg


def init_device_mesh(mesh_dim_comms, mesh_dim_names, _global_comm=None):
    raise NotImplementedError("rcclx.torchcomms.device_mesh.init_device_mesh: DeviceMesh over rcclx is not "
                              "implemented (use rcclx.distributed's process group with torch's own "
                              "init_device_mesh on torch 2.x)")
